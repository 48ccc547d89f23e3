"""Studies: experiments that measure bert4long against baselines on real data.

Apart from the product: the position-extension study (`studies.position_study`), the frozen-encoder classification
study (`studies.classification_study`) and the fine-tuning study (`studies.finetune_study`), among others. Each is a
module run from the repository (``python -m studies.position_study --quick``) and writes its JSON to
``studies/results/``; ``python -m studies.report`` writes docs/results.md from those and ``benchmarks/results/``.
Not part of the installed package; the studies use `benchmarks.common`'s measuring tools.
"""
