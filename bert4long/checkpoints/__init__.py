"""Checkpoints in and out: reading, checking, mapping and writing Google TF checkpoints and Hugging Face folders.

- `source`: `resolve_source`, what a checkpoint path and config resolve to, once (family, config, reader).
- `config`: config files read, validated and translated (the key table: `bert4long.families.CONFIG_KEYS`).
- `tf_format`: the reader protocol (`WeightReader`) and TensorFlow checkpoint reading and writing.
- `safetensors_io`: ``model.safetensors`` reading and writing.
- `layout`: the engine that applies a builder's ``variable_mapping()`` both ways (`CheckpointIO`), and the checks
  of a checkpoint against its config; `bert_layout`: the Google BERT names as that mapping.
- `huggingface`: BERT/RoBERTa/XLM-RoBERTa folders read under Google names, and converted to the Google layout;
  `hf_folder`: the families read under their own names, and every family's folder written back.
- `position_record`: the position extension a checkpoint was trained with, recorded in its config;
  `extension`: an extended position table written into a checkpoint.
"""
