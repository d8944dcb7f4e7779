"""The package version, in one place (read by setup.py without importing torch)."""

__version__ = "0.1.0"
