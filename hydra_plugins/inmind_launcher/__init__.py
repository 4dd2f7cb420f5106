"""inmind-exp's Hydra launcher: a ``-m`` sweep planned in full, then run as one schedule (see inmind_launcher.py)."""
