"""mmelocal.runtime"""
