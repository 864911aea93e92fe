"""Storage core: segmented files, group commit, recovery and compaction."""
