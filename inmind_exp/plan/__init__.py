"""Planning: a composed config resolved into a frozen ``Plan`` (``plan``), configurations of a sweep that compute the
same results (``dedupe``) or share all but the judge calls (``reuse``), the dry run's estimate (``estimate``) and the
durable per-configuration ledger that makes a rerun resume (``ledger``)."""
