"""Cost models: pure functions from specs to time and memory. No simulation here."""
