"""inmind-exp's Hydra search-path plug-in: installed memory-system plug-ins' config packages (see inmind_searchpath.py)."""
