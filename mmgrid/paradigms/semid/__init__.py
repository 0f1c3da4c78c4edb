"""SemID paradigm (LC-Rec-style): RQ-KMeans semantic IDs as new tokens, trie-constrained beam search.

Importing this package registers the paradigm as ``"semid"``.
"""

from __future__ import annotations

from mmgrid.paradigms.semid.paradigm import SemIDParadigm
from mmgrid.paradigms.semid.quantizer import SemanticIDs, SemIDError, semantic_ids
from mmgrid.paradigms.semid.trie import CodeTrie, trie_beam_search

__all__ = ["CodeTrie", "SemIDError", "SemIDParadigm", "SemanticIDs", "semantic_ids", "trie_beam_search"]
