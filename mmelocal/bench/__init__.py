"""mmelocal.bench"""
