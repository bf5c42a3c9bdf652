"""Fixtures for the emulator tests (mme_endpoint and local_aws_env, whose S3 the S3 store
tests use, come from the mmelocal pytest plugin)."""
