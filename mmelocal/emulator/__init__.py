"""mmelocal.emulator"""
