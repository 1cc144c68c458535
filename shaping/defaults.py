"""The shaping knobs' defaults, in one place: the run config's ``shaping`` section and the policies' constructors
both read them, so a policy built directly (tests, notebooks) behaves as one built from a default config."""

AVG_REDUNDANCY = 1.5  # samples launched per sample kept: DARTS's average over prompts, SART's per prompt
MIN_REDUNDANCY = 1.0  # DARTS: a prompt's fewest samples launched, x the samples kept (n_min)
MAX_REDUNDANCY = 2.0  # DARTS: a prompt's most samples launched, x the samples kept (n_max)
SPARE_GATE = True  # DARTS: launch a prompt's spares only where its observed lengths say they pay (spares.py)
LONG_SLOTS = 1  # DARTS: kept slots reserved for long samples
WARMUP_STEPS = 0  # DARTS: steps with uniform budgets before the length statistics are trusted
TIE_BETA = 0.1  # TIE's tail weight: E[X~] + beta * CVaR[X~]
PRUNE_ALPHA = 0.3  # SART: the score below which phase 1 prunes (on the scorer's scale)
PRUNE_BETA = 2  # SART: at most this many prunes in phase 1
PROGRESS_EVERY_TOKENS = 16  # running samples are looked at every this many tokens (DARTS checks in 100-token chunks)
