"""mmelocal.cli"""
