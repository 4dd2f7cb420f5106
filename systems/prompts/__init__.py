"""Upstream prompt texts of the built-in memory systems, one constant module per system (``systems.prompts.<name>``),
each naming the repository, commit, file and licence it quotes, with every change from upstream listed. The system
modules import these constants by name, so they are hashed into result identities (``inmind_exp.config.code``) and
checked by the prompt-neutrality test like prompts written in the system module itself."""
