"""BERT, RoBERTa and XLM-RoBERTa: three families on one builder (`bert4long.models.BERT`).

They differ only in their declarations: RoBERTa's position table starts after its padding id (two unused
rows) and its folders name the encoder ``roberta.`` and the MLM head ``lm_head.``; XLM-RoBERTa is RoBERTa
with a SentencePiece vocabulary (BGE-M3 and multilingual-e5 are XLM-RoBERTa with 8,194 positions).

>>> XLM_ROBERTA_FAMILY.from_huggingface({"vocab_size": 250002, "max_position_embeddings": 8194, "pad_token_id": 1,
...                                      "hidden_size": 1024})["max_position"]
8192
"""
from bert4long.config_keys import CONFIG_KEYS
from bert4long.family import Family, with_defaults

BERT_FAMILY = Family("bert", "bert4long.models:BERT", model_types=("bert",), architecture="Bert",
                     task_prefixes=("bert.",), head_prefixes=("cls.",))
ROBERTA_FAMILY = Family("roberta", "bert4long.models:BERT", model_types=("roberta",), architecture="Roberta",
                        task_prefixes=("roberta.",), head_prefixes=("lm_head.",),
                        config_keys=with_defaults(CONFIG_KEYS, pad_token_id=1), position_offset=True, tokenizer="bpe")
XLM_ROBERTA_FAMILY = Family("xlm-roberta", "bert4long.models:BERT", aliases=("xlm_roberta",),
                            model_types=("xlm-roberta",), architecture="XLMRoberta", task_prefixes=("roberta.",),
                            head_prefixes=("lm_head.",), config_keys=with_defaults(CONFIG_KEYS, pad_token_id=1),
                            position_offset=True, tokenizer="sentencepiece")
