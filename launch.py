"""``python launch.py`` from a checkout is the ``inmind`` command (``inmind_exp.launch.cli``): compose the config with
Hydra (``-m`` expands a sweep), run each configuration, print the table; exit codes in ``inmind_exp.errors.Exit``.

    python launch.py                                   # default run on the embedded local LLM
    python launch.py -m system=backbone,naive_rag embedding=minilm,bm25
    python launch.py -m dry_run=true system=a_mem,mem0  # estimated calls and tokens, nothing runs
"""

from inmind_exp.launch.cli import main

if __name__ == "__main__":
    main()
