"""Usage history's writes (docs/usage-history.md): the roll-up of pods' intervals into
buckets (`rollup`) and historical fair share's decayed usage (`decay`)."""
