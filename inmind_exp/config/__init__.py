"""Configuration: the typed schemas of every group (``schema``), the frozen run settings and endpoints resolved from
a composed config (``settings``), the checks made before any work starts (``checks``), and the result identity
(``identity``: what changes a result; ``code``: the part of it that is the code and the prompts)."""
