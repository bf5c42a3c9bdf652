"""mmelocal.builder"""
