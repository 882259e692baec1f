"""Processes that feed observation parts to the daemon's control loop (cameras)."""
