"""Reports: terminal tables, JSON and plots. Reads results; never simulates."""
