"""The plug-in surface: everything a memory system needs, importable from here (``base``: the interface, the
registry and the provenance helpers; ``answering``: the answerers the protocol chooses; ``traits``: what analysis
reads from a system's class; ``ranges``: parameter ranges). ``python -m inmind_exp.testing.check_system`` checks a
system against it."""

from inmind_exp.memory import base
from inmind_exp.memory.base import *  # noqa: F403 - the surface is base.__all__, stated once

__all__ = list(base.__all__)
