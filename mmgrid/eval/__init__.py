"""Evaluation: ranking metrics, full-ranking evaluation, text retention, the accuracy
matrix, the most-popular baseline and the Table-2-style baseline table."""

from mmgrid.eval.matrix import backward_transfer, forgetting, forward_transfer, transfer_summary
from mmgrid.eval.metrics import ndcg_at_k, ranking_metrics, recall_at_k, target_ranks
from mmgrid.eval.popular import popular_ranking

__all__ = [
    "backward_transfer",
    "forgetting",
    "forward_transfer",
    "ndcg_at_k",
    "popular_ranking",
    "ranking_metrics",
    "recall_at_k",
    "target_ranks",
    "transfer_summary",
]
