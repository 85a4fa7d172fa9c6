"""Layer 2, stores: facts, episodes, procedures, git and local usage state. They read files and plan writes
(a ``FileChange``: the bytes before and after) and commit; they know nothing of the index or the vault object."""
