-- rankscope 0008: goodput and energy as first-class parameterized views (issue 6), with the
-- SQL of the named queries (the runner inserts sinks/sql/<name>.sql for {named:<name>}):
--   SELECT * FROM rankscope.job_goodput(job_id = 'j', price_per_gpu_hour = 2.5)
--   SELECT * FROM rankscope.job_energy(job_id = 'j')
-- A view takes every parameter explicitly (the files' defaults do not apply).

CREATE OR REPLACE VIEW {db}.job_goodput AS {named:goodput};

CREATE OR REPLACE VIEW {db}.job_energy AS {named:energy_per_step}
