"""Tables 3 and 4 and the lambda* regression (Spearman's rho), from the registry.

    python analysis/tables34_lambda.py CONFIG [KEY=VALUE ...] --out DIR
"""

from mmgrid.sweep.figures import regression_plot
from mmgrid.sweep.lambda_model import predict_lambda
from mmgrid.sweep.results import script_grid
from mmgrid.sweep.tables import markdown_table, regression_summary, table3, table4
from mmgrid.sweep.temporal import temporal_results

a, cfg, reg, prepared = script_grid(__doc__)
pred = predict_lambda(cfg, reg, prepared, evaluate=False)
print(markdown_table(table4(pred)[0]), "\n")
print(markdown_table(regression_summary(pred), "{:.4g}"), "\n")
t = cfg.sweeps.temporal
hat = temporal_results(reg, paradigm=t.paradigm, variant=t.variant, study="lambda_hat")
temp = temporal_results(reg, paradigm=t.paradigm, variant=t.variant)
print(markdown_table(table3(temp, hat, sorted(pred.table["domain"]))[0]), "\n")
print(f"Spearman rho = {pred.rho:.3f} (p = {pred.pvalue:.3g}): lambda* {pred.direction} as {pred.features[0]} rises")
print(regression_plot(pred.table, pred.features[0], f"{a.out}/lambda_regression.png", pred.loo, pred.rho))
