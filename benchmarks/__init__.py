"""The product's measurements: speed, memory and cost of bert4long's paths, each a module run from the repository
(``python -m benchmarks.speed --quick``), writing JSON to ``benchmarks/results/``. Not part of the installed
package; ``python -m studies.report`` turns the JSON into docs/results.md."""
