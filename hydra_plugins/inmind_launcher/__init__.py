"""inmind-exp's Hydra launcher: a ``-m`` sweep planned in full, then run as one schedule (the class Hydra discovers is
in launcher.py; the launcher's code in inmind_exp/launch/launcher.py)."""
