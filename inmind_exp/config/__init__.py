"""Configuration: the typed schemas of every group (``schema``), the composed config typed once at the edge
(``resolve``: ``as_config``), the frozen run settings and endpoints resolved from it (``settings``), the loaders a
configuration's dataset and trace name (``sources``), the checks made before any work starts (``checks``), and the
result identity (``identity``: what changes a result; ``code``: the part of it that is the code and the prompts)."""
