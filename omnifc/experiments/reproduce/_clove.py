"""CLoVE reproduction: the headline claim, our plaintext and our secure result.

:func:`run` returns ``(title, claim rows, notes, figure)`` for
:func:`._report.write_paper_report`.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import adjusted_rand_score

from ._report import (accuracy_noise, compared, docs_link, figure, not_better, pair_lines,
                      paired_noise, yes)

__all__ = ["run", "DOCS_IFCA_BELOW_HALF"]

#: docs/adapters.md (CLoVE), seeds 0-29, exact local fits: IFCA's final ARI below 0.5 on
#: this many of 30 seeds per Delta; quoted next to this page's own count, not re-run.
DOCS_IFCA_BELOW_HALF = {1.0: 11, 0.1: 28}


def run(quick: bool):
    from ...adapters import clove

    seeds = (100,) if quick else tuple(range(100, 110))
    rows, curves, comparisons, missed = [], {}, [], []
    for delta in (1.0, 0.1):
        aris = {"plain": [], "secure": [], "ifca": []}
        same = True
        for seed in seeds:
            clients, truth, _ = clove.linear_mixture(delta=delta, seed=seed)
            start = clove.random_unit_models(5, 20, seed=1000 + seed)
            sec = clove.run_clove(clients, start, n_clusters=5, rounds=3, seed=seed,
                                  parties=np.arange(len(clients)) % 5)
            pla = clove.run_clove(clients, start, n_clusters=5, rounds=3, seed=seed,
                                  secure=False)
            ifca = clove.run_ifca(clients, start, rounds=3)
            same &= all(np.array_equal(a, b) for a, b in zip(sec.assignments, pla.assignments))
            for key, run in (("plain", pla), ("secure", sec), ("ifca", ifca)):
                aris[key].append([adjusted_rand_score(truth, a) for a in run.assignments])
        curves[delta] = {k: np.mean(v, axis=0) for k, v in aris.items()}
        final = {k: [v[-1] for v in vals] for k, vals in aris.items()}
        ones = sum(a == 1.0 for a in final["plain"])
        below_one = sum(a < 1.0 for a in final["ifca"])
        below_half = sum(a < 0.5 for a in final["ifca"])
        noise = paired_noise(final["secure"], final["ifca"])
        ours, theirs = float(np.mean(final["secure"])), float(np.mean(final["ifca"]))
        comparisons.append((f"linear regression, Delta = {delta:g}, mean final ARI",
                            "IFCA", ours, theirs, noise))
        stuck = below_half > len(seeds) / 2
        if not stuck:
            missed.append(
                f"'IFCA stuck' (final ARI below 0.5 on most seeds) at Delta = {delta:g}: "
                f"{below_half}/{len(seeds)} seeds here, "
                f"{DOCS_IFCA_BELOW_HALF.get(delta, '?')}/30 in docs/adapters.md (seeds "
                "0-29); IFCA ends below ARI 1 on "
                f"{below_one}/{len(seeds)} here.")
        rows.append((f"loss-vector clustering recovers 5 clusters (linear regression, "
                     f"Delta = {delta:g}): mean final ARI "
                     + compared("IFCA", ours, theirs, noise)
                     + f"; IFCA below ARI 0.5 in {below_half}/{len(seeds)} seeds (docs/"
                     f"adapters.md, seeds 0-29: {DOCS_IFCA_BELOW_HALF.get(delta, '?')}/30), "
                     f"below ARI 1 in {below_one}/{len(seeds)}: 'IFCA stuck' "
                     + ("holds" if stuck else "does not hold") + " at this Delta",
                     "ARI = 1 within 2 rounds; IFCA stuck",
                     f"ARI 1 in {ones}/{len(seeds)}; final ARI "
                     f"{', '.join(f'{a:.2f}' for a in final['plain'])}; IFCA "
                     f"{', '.join(f'{a:.2f}' for a in final['ifca'])}",
                     f"final ARI {', '.join(f'{a:.2f}' for a in final['secure'])}",
                     yes(same)))
    classifier_note = ("CLoVE on a classifier: `clove.run_clove_fl` is not in this tree; "
                       "only the linear-regression claim is reproduced here.")
    if hasattr(clove, "run_clove_fl"):
        from ... import fl

        data = fl.make_federated("digits", shift="concept", n_groups=3, clients_per_group=5,
                                 seed=21)
        model = fl.SoftmaxRegression(data.n_features, data.n_classes)
        start = [model.init(seed=100 * 21 + j) for j in range(3)]
        rounds = 4 if quick else 6
        sec = clove.run_clove_fl(data.clients, model, start, n_clusters=3, rounds=rounds,
                                 seed=21)
        pla = clove.run_clove_fl(data.clients, model, start, n_clusters=3, rounds=rounds,
                                 seed=21, secure=False)
        ifca = fl.run_federated(data.clients, start, rounds=rounds,
                                local_train=clove.classifier_trainer(model),
                                assign=fl.ifca_assign(model),
                                evaluate=fl.accuracy_evaluator(model), seed=21)
        same = all(np.array_equal(a, b) for a, b in zip(sec.models, pla.models))
        ifca_acc = ifca.history[-1].metrics["accuracy"]
        n_test = sum(c.y_test.size for c in data.clients)
        comparisons.append(("digits classifier, concept shift, 3 groups, seed 21, accuracy",
                            "IFCA", sec.accuracy, ifca_acc,
                            accuracy_noise(sec.accuracy, ifca_acc, n_test)))
        rows.append(("CLoVE on a classifier (digits, concept shift, 3 groups): accuracy "
                     + compared("IFCA", sec.accuracy, ifca_acc,
                                accuracy_noise(sec.accuracy, ifca_acc, n_test)),
                     "clusters recovered; accuracy above IFCA",
                     f"ARI {adjusted_rand_score(data.groups, pla.assignments[-1]):.2f}, "
                     f"accuracy {pla.accuracy:.3f}; IFCA ARI "
                     f"{adjusted_rand_score(data.groups, ifca.assignment):.2f}, accuracy "
                     f"{ifca.history[-1].metrics['accuracy']:.3f}",
                     f"ARI {adjusted_rand_score(data.groups, sec.assignments[-1]):.2f}, "
                     f"accuracy {sec.accuracy:.3f}", yes(same)))
        classifier_note = ("CLoVE on a classifier: `clove.run_clove_fl` with its defaults "
                           "(softmax regression, random round 0, K known: 4 round-0 restarts "
                           "and 10 k-means runs per round, i.e. 4 runs) against IFCA from the "
                           "same models, seed 21.")
    fig, axes = figure(2)
    for ax, (delta, c) in zip(axes, curves.items()):
        r = np.arange(len(c["plain"]))
        pair_lines(ax, r, c["plain"], c["secure"], "CLoVE", "tab:blue")
        ax.plot(r, c["ifca"], ":s", color="tab:red", label="IFCA")
        ax.set_title(f"linear mixture, Delta = {delta:g}, {len(seeds)} seed(s)")
        ax.set_xlabel("round")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel("ARI to the true clusters (mean)")
        ax.set_ylim(-0.05, 1.05)
        ax.legend(fontsize=8, loc="center right")
    notes = ["Paper: CLoVE (ICML 2026, arXiv 2506.22427), official code; set-up of its "
             "runs 800-804 (5 clusters x 5 clients, d = 20, 900 points; exact local fits "
             "instead of Adam, see docs/adapters.md).", classifier_note]
    return {"title": "CLoVE: clustering loss vectors", "rows": rows, "notes": notes,
            "figure": fig,
            "seeds": (f"linear regression: data seeds {', '.join(map(str, seeds))}, initial "
                      "models 1000 + seed; held out (no rule of `run_clove` was tuned on "
                      "them: K is known here and the rest is the paper's algorithm). "
                      "Classifier: seed 21, held out (K is known on this page; the ward-gap "
                      "K rule was designed on seeds 0, 1, 22, the calibrated K rule, now the "
                      "default, on other federations (docs/adapters.md); the default round-0 "
                      "restarts and k-means runs on seeds 50-59 (held out for them: 70-79, "
                      "30-33), the default loss transform (square roots) on seeds 50-59 "
                      "(held out for it: 400-439, and 440-469 with K unknown))."),
            "noise": "linear regression: two standard errors of the mean paired difference "
                     "of the final ARI over the seeds (`paired_noise`; a pair = the same data "
                     "and initial models); classifier: two binomial standard errors of the "
                     "difference of two pooled test accuracies (`accuracy_noise`); ARI "
                     "counts are exact.",
            "not_reproduced": [
                "The paper's CNN experiments (random round 0, Adam, unknown K with K_hat = "
                "15-20 on image data sets such as FEMNIST and MNIST, per the reference "
                "notes): only linear regression and a softmax-regression classifier on "
                "digits run here.",
                "FINCH as the clustering algorithm (not implemented).",
                "Recovery with K known in >= 95 % of runs on an MLP (the issue's goal) "
                "under label shift: docs/adapters.md reports, on held-out seeds 70-79 with "
                "unequal groups, 48/60 with the defaults (4 restarts, 10 k-means runs) and "
                "48/60 with the paper's loop (the clients' own label histograms separate the "
                "groups in 56/60; 47 of those recovered; CLoVE's own objective told the "
                "groups' models keeps them in 46/60, the planted partition not being the "
                "k-means optimum of its loss vectors in the other 14, so the limit is the "
                "objective, not the loop); feature shift is met (83/84 on held-out seeds "
                "30-33 and 70-79, the paper's loop 80/84). With the square-root default (since "
                "the fifteenth pass) label shift stays below the goal on every set of fresh "
                "seeds: 193/240 on 400-439, 167/240 on 470-509, 184/240 on 510-549, 189/240 "
                "on 550-589, and within reach of CLoVE's objective told the groups 712 of 773 "
                "runs over those four sets (92.1 %); a chooser told the truth among the "
                "default's 4 round-0 draws keeps 182 of 198 within reach on 510-549, and 3 "
                "probe models per cluster tie with the default (196 against 189 of 240 on "
                "550-589); this page runs one softmax-regression federation."]
            + missed + not_better("CLoVE above IFCA", comparisons),
            "headline": [
                "Automatic K on a classifier (the calibrated rule, the default: 32/36 on "
                "design seeds 0, 1, 22, 34/36 held out on 3-5, 69/72 on 60-65; the previous "
                "ward gap 32/36, 35/36, 70/72: a tie within noise; the paper's silhouette "
                "rule 25/36, 24/36, 47/72), recovery with K known (72/72, IFCA 42/72, seeds "
                "0-5) and the defaults with K known (4 round-0 restarts, 10 k-means runs; "
                "MLP, held out: feature shift 30-33 and 70-79 83/84, the paper's loop "
                "80/84; label shift 70-79 48/60 and 48/60; design seeds 50-59): "
                + docs_link("docs/adapters.md, CLoVE on a classifier", "adapters.md",
                            "CLoVE on a classifier (`clove.run_clove_fl`, in the `omnifc.fl` "
                            "loop)") + "; not re-run by this page.",
                "IFCA on linear regression over seeds 0-29 (below ARI 0.5 on "
                f"{DOCS_IFCA_BELOW_HALF[1.0]}/30 at Delta = 1, {DOCS_IFCA_BELOW_HALF[0.1]}/30 at "
                "Delta = 0.1): "
                + docs_link("docs/adapters.md, CLoVE", "adapters.md",
                            "CLoVE (ICML 2026, arXiv 2506.22427)")
                + "; not re-run (this page's rows count the same thing on seeds "
                f"{seeds[0]}-{seeds[-1]})."]}
