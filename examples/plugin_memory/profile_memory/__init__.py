"""An example InMind memory system outside the inmind-exp repository (``profile_memory.hybrid.ProfileRAG``)."""
