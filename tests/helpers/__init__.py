"""Helpers shared by the durable-run tests (subprocess scripts and trace comparison)."""
