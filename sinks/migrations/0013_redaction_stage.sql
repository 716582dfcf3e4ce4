-- rankscope 0013: where each redaction finding was made (issue 16): the node agent and the
-- in-process OTel exporter redact before publishing, the stream worker is the second line.
-- Rows written before this migration were all the stream's.

ALTER TABLE {db}.redaction_audit
    ADD COLUMN IF NOT EXISTS stage LowCardinality(String) DEFAULT 'stream' AFTER rules_version;
