"""One task of the InMind protocol: inject the fact, replay the trace into a memory system, ask both queries
(``task``), judge them (``judges``) and bound them without a judge (``bounds``: provenance and verbatim), run the
negative controls (``controls``), record what an answer cost (``budget``), and turn task records into the paper's
metrics (``metrics``)."""
