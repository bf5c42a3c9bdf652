"""Project-wide pytest configuration (the user-facing fixtures live in mmelocal.testing.plugin)."""
