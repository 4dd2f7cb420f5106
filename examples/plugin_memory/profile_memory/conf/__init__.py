"""Hydra config of the plug-in (``system/profile_rag.yaml``), on Hydra's search path as ``pkg://profile_memory.conf``."""
