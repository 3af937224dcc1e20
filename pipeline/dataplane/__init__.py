"""The data plane's support code: example I/O, Beam runners, analyzers, statistics, schema, CSV.

Stage modules (`pipeline/stages/{ingest,statistics,validate,transform}.py`) stay thin and
call into these modules. Nothing here imports TensorFlow or Beam at module top, so importing the
package is cheap; the heavy imports happen inside the functions that need them.
"""
