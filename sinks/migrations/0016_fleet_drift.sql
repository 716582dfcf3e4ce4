-- rankscope 0016: fleet drift (issue 19). drift_slowdown.sql finds the windows of ranks on
-- drifted nodes by node, which is not in rank_windows' sort key (job, time, rank): a bloom
-- filter on node lets that lookup skip granules instead of reading every window.

ALTER TABLE {db}.rank_windows ADD INDEX IF NOT EXISTS idx_node node
    TYPE bloom_filter(0.01) GRANULARITY 4;
