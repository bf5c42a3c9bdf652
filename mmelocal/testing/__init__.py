"""mmelocal.testing"""
