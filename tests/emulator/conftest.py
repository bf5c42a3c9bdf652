"""Fixtures for the emulator tests (mme_endpoint itself comes from the mmelocal pytest plugin;
moto_s3 from tests/conftest.py)."""
