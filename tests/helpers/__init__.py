"""Helpers shared by the test modules (tests/ is on sys.path under pytest's default import mode).

Fixtures live in tests/conftest.py; plain functions and data live here.
"""
