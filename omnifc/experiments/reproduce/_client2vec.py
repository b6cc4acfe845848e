"""Client2Vec reproduction: the headline claim, our plaintext and our secure result.

:func:`run` returns ``(title, claim rows, notes, figure)`` for
:func:`._report.write_paper_report`.
"""

from __future__ import annotations

import numpy as np

from ._report import compared, docs_link, figure, not_better, paired_noise, verdict, yes

__all__ = ["run", "SHIFT_SEEDS", "SHIFTS"]

#: Held-out seeds of the "where each use helps and where it hurts" rows: the defaults (no
#: use on) were decided on seeds 310-317 and the regularizer's earlier default on 200-203
#: (docs/adapters.md); 300-303 were this page's seeds before; these were never looked at.
SHIFT_SEEDS = (320, 321, 322, 323)
#: The two shifts of those rows: (label, make_federated keywords).
SHIFTS = (("feature rotation", dict(shift="feature", feature_transform="rotate")),
          ("label shift", dict(shift="label")))


def _shift_rows(quick: bool):
    """Each use against FedAvg under feature rotation and under label shift (pooled accuracy).

    3 domains x 4 clients, 100 training rows, 20 rounds, 4 clients per round, on
    :data:`SHIFT_SEEDS`: each use alone, sampling + MWU (the previous defaults) and all
    three (the paper's) against FedAvg, which is the library's defaults (no use; checked).
    Returns (rows, comparisons for :func:`not_better`, {(shift, variant): mean pooled
    accuracy}).
    """
    from ... import fl
    from ...adapters import client2vec as c2v

    seeds = SHIFT_SEEDS[:1] if quick else SHIFT_SEEDS
    variants = (("FedAvg (the defaults: no use)", dict(uses="fedavg")),
                ("regularizer alone", dict(sampling=False, mwu=False, regularizer=True)),
                ("similarity sampling alone", dict(sampling=True, mwu=False,
                                                   regularizer=False)),
                ("MWU alone", dict(sampling=False, mwu=True, regularizer=False)),
                ("sampling + MWU (the previous defaults)", dict(sampling=True, mwu=True,
                                                                regularizer=False)),
                ("all three (the paper's, uses='paper')", dict(uses="paper")))
    if c2v.resolve_uses() != c2v.USES["fedavg"]:
        raise RuntimeError("the library's defaults are no longer 'no use': update this page")
    rows, comparisons, means = [], [], {}
    for shift, keywords in SHIFTS:
        acc = {}        # (variant, secure) -> [pooled accuracy per seed]
        identical = True
        for seed in seeds:
            data = fl.make_federated("digits", n_groups=3, clients_per_group=4,
                                     train_samples=100, test_samples=60, seed=seed, **keywords)
            for name, flags in variants:
                runs = {}
                for secure in (False, True):
                    runs[secure] = c2v.run_federated_client2vec(
                        data.clients, n_features=64, n_classes=10, rounds=20, per_round=4,
                        secure=secure, seed=seed, encoder_dim=64, **flags)
                    acc.setdefault((name, secure), []).append(runs[secure]["accuracy"])
                identical &= bool(np.array_equal(runs[True]["run"].models[0],
                                                 runs[False]["run"].models[0]))
        base = acc[(variants[0][0], True)]
        means.update({(shift, n): float(np.mean(acc[(n, True)])) for n, _ in variants})
        for name, _ in variants[1:]:
            ours = acc[(name, True)]
            mean, mean_base = float(np.mean(ours)), float(np.mean(base))
            noise = paired_noise(ours, base)
            better = sum(a > b for a, b in zip(ours, base))
            comparisons.append((f"{name}, {shift}", "FedAvg", mean, mean_base, noise))
            plain = acc[(name, False)]
            rows.append((f"{name} against FedAvg ({shift}, 3 domains x 4 clients, pooled): "
                         + compared("FedAvg", mean, mean_base, noise),
                         "each use improves FL",
                         f"{float(np.mean(plain)):.3f} vs "
                         f"{float(np.mean(acc[(variants[0][0], False)])):.3f}",
                         f"{mean:.3f} vs {mean_base:.3f} (better on {better}/{len(seeds)} "
                         "seeds)", yes(identical)))
    return rows, comparisons, means


def run(quick: bool):
    from ... import fl
    from ...adapters import client2vec as c2v
    from ...adapters.fmcl import fixed_encoder

    seeds = (100,) if quick else (100, 101, 102, 103)
    rounds = 20
    variants = (("FedAvg", dict(sampling=False, mwu=False, regularizer=False)),
                ("MWU aggregation", dict(sampling=False, mwu=True, regularizer=False)),
                ("similarity sampling", dict(sampling=True, mwu=False, regularizer=False)),
                ("local regularizer", dict(sampling=False, mwu=False, regularizer=True)),
                ("all three", dict(sampling=True, mwu=True, regularizer=True)))
    results = {}     # (variant, secure) -> list of (majority, pooled)
    sims, identical = [], True
    for seed in seeds:
        data = fl.make_federated("digits", shift="feature", n_groups=2, clients_per_group=7,
                                 train_samples=100, test_samples=60, seed=seed,
                                 feature_transform="permute")
        clients = [c for c in data.clients if c.group == 0] + \
            [c for c in data.clients if c.group == 1][:3]
        model = fl.SoftmaxRegression(64, 10)
        encode = fixed_encoder(64, 64, seed=seed)
        for name, flags in variants:
            out = {}
            for secure in (False, True):
                r = c2v.run_federated_client2vec(clients, n_features=64, n_classes=10,
                                                 rounds=rounds, per_round=4, secure=secure,
                                                 seed=seed, encoder_dim=64, **flags)
                g = r["run"].models[0]
                major = float(np.mean([model.accuracy(g, encode(c.x_test), c.y_test)
                                       for c in clients[:7]]))
                results.setdefault((name, secure), []).append((major, r["accuracy"]))
                out[secure] = r
            identical &= bool(np.array_equal(out[True]["run"].models[0],
                                             out[False]["run"].models[0]))
            if name == "FedAvg":
                s = out[True]["similarity"]
                off = ~np.eye(7, dtype=bool)
                sims.append((s[:7, :7][off].mean(), s[:7, 7:].mean()))

    def mean(name, secure, which):
        return float(np.mean([v[which] for v in results[(name, secure)]]))

    def wins(name, secure):
        return sum(a[0] > b[0] for a, b in zip(results[(name, secure)],
                                               results[("FedAvg", secure)]))

    rows = [("the index separates domains (S within vs across)",
             "DomainNet heat map: high within, low across",
             f"{np.mean([a for a, _ in sims]):.2f} vs {np.mean([b for _, b in sims]):.2f}",
             f"{np.mean([a for a, _ in sims]):.2f} vs {np.mean([b for _, b in sims]):.2f}",
             "bit-identical D (tested)")]
    def column(name, secure, which):
        return [v[which] for v in results[(name, secure)]]

    comparisons = []
    for name, _ in variants[1:]:
        ours, base = column(name, True, 0), column("FedAvg", True, 0)
        pooled, pooled_base = column(name, True, 1), column("FedAvg", True, 1)
        comparisons += [(f"{name}, 7 + 3 federation, majority domain", "FedAvg",
                         float(np.mean(ours)), float(np.mean(base)), paired_noise(ours, base)),
                        (f"{name}, 7 + 3 federation, pooled", "FedAvg",
                         float(np.mean(pooled)), float(np.mean(pooled_base)),
                         paired_noise(pooled, pooled_base))]
        rows.append((f"{name} against FedAvg: majority domain "
                     + compared("FedAvg", float(np.mean(ours)), float(np.mean(base)),
                                paired_noise(ours, base))
                     + "; pooled " + compared("FedAvg", float(np.mean(pooled)),
                                              float(np.mean(pooled_base)),
                                              paired_noise(pooled, pooled_base)),
                     "each use improves FL; the regularizer gains most in the ablation",
                     f"{mean(name, False, 0):.3f} vs {mean('FedAvg', False, 0):.3f} "
                     f"(better on {wins(name, False)}/{len(seeds)} seeds); pooled "
                     f"{mean(name, False, 1):.3f} vs {mean('FedAvg', False, 1):.3f}",
                     f"{mean(name, True, 0):.3f} vs {mean('FedAvg', True, 0):.3f}",
                     yes(identical)))
    shift_rows, shift_comparisons, shift_means = _shift_rows(quick)
    rows += shift_rows
    comparisons += shift_comparisons
    fig, axes = figure(2, width=7.5)
    ax = axes[0]
    xs = np.arange(len(variants))
    for offset, secure, hatch in ((-0.2, False, None), (0.2, True, "//")):
        ax.bar(xs + offset, [mean(n, secure, 0) for n, _ in variants], width=0.4,
               color="tab:blue", alpha=0.5 if not secure else 0.9, hatch=hatch,
               label="majority domain, " + ("secure" if secure else "plaintext"))
        ax.plot(xs + offset, [mean(n, secure, 1) for n, _ in variants], "kD", markersize=4,
                label="all clients (pooled)" if secure else None)
    ax.set_xticks(xs, [n for n, _ in variants], fontsize=8)
    lo = min(mean(n, s, w) for n, _ in variants for s in (False, True) for w in (0, 1))
    ax.set_ylim(max(0.0, lo - 0.1), 1.0)
    ax.set_ylabel("test accuracy of the global model")
    ax.set_title(f"Client2Vec on digits: 7 + 3 clients of two domains, "
                 f"{len(seeds)} seed(s), mean")
    ax.legend(fontsize=8, loc="lower left")
    ax = axes[1]
    names = list(dict.fromkeys(v for _, v in shift_means))
    for j, (shift, _) in enumerate(SHIFTS):
        ax.bar(np.arange(len(names)) + (j - 0.5) * 0.4,
               [shift_means[(shift, n)] for n in names], width=0.4,
               color=("tab:green", "tab:red")[j], label=f"{shift} (secure)")
    ax.set_xticks(np.arange(len(names)),
                  [n.split(" (")[0].replace(" alone", "").replace("similarity ", "similarity\n")
                   for n in names], fontsize=8)
    ax.set_ylim(0.0, 1.0)
    ax.set_ylabel("pooled test accuracy of the global model")
    ax.set_title(f"3 domains x 4 clients, held-out seeds, mean of "
                 f"{len(SHIFT_SEEDS[:1] if quick else SHIFT_SEEDS)}")
    ax.legend(fontsize=8, loc="lower left")
    by_use = {c[0]: verdict(c[2], c[3], c[4]) for c in shift_comparisons}
    where = " ".join(
        f"{use}: " + "; ".join(f"{shift}: {by_use[f'{use}, {shift}']}" for shift, _ in SHIFTS)
        + "." for use in dict.fromkeys(c[0].rsplit(", ", 1)[0] for c in shift_comparisons))
    notes = [
        "Paper: Client2Vec (ICCV 2025, arXiv 2405.16233); no public code, and its CLIP / "
        "DomainNet set-up cannot run offline. Our case: a federation of 7 clients of one "
        "domain and 3 of another (digits, fixed feature permutation), 4 clients per round; "
        "the server serves the majority population. Frozen encoder: a random ReLU map "
        "(64 -> 64); model: softmax regression on the embeddings.",
        "Index network: a linear DSA-IGN trained with the paper's four losses on 500 public "
        "unshifted digits; indices centred by the federation's mean embedding (secure sum).",
        f"Omnifc's choices (the library's defaults, read from the module): S = cos_f + cos_l, "
        f"mean pairwise set similarity, tau = {c2v.DEFAULT_TAU:g}, lambda_1 = "
        f"{c2v.DEFAULT_LAMBDA:g}, gamma = {c2v.DEFAULT_GAMMA:g}, lambda_orth = "
        f"{c2v.DEFAULT_LAMBDA_ORTH:g}, lambda_kd = {c2v.DEFAULT_LAMBDA_KD:g}; no use of the "
        f"index is on by default (`DEFAULT_SAMPLING = {c2v.DEFAULT_SAMPLING}`, `DEFAULT_MWU = "
        f"{c2v.DEFAULT_MWU}`, `DEFAULT_REGULARIZER = {c2v.DEFAULT_REGULARIZER}`: the loop is "
        "FedAvg with uniform partial participation); `uses='paper'` runs all three. The rows "
        "of the 7 + 3 federation set every use explicitly.",
        "**Where each use helps and where it hurts** (pooled accuracy against FedAvg, "
        f"3 domains x 4 clients, computed above): {where}",
        "MWU moves weight toward clients similar to the sampled sets (it serves the majority "
        "population; see the rows' pooled verdicts for the minority's side).",
    ]
    shift_seeds = SHIFT_SEEDS[:1] if quick else SHIFT_SEEDS
    return {"title": "Client2Vec: client indices for sampling, aggregation and local training",
            "rows": rows, "notes": notes, "figure": fig,
            "seeds": (f"7 + 3 federation: {', '.join(map(str, seeds))} (data, encoder and "
                      "training); held out: lambda_kd was chosen on seeds 0-4 of another "
                      "federation (docs/adapters.md); tau, lambda_1, gamma and lambda_orth "
                      "were set, not tuned on these. Feature rotation and label shift rows: "
                      f"{', '.join(map(str, shift_seeds))}, held out (the defaults, no use on, "
                      "were decided on seeds 310-317 and the regularizer's earlier default on "
                      "200-203, docs/adapters.md; 300-303 were this page's seeds before)."),
            "noise": "two standard errors of the mean paired difference over the seeds "
                     "(`paired_noise`; a pair = the same data, encoder and seed on both "
                     "sides).",
            "headline": [
                "The regularizer's lambda_kd table (seeds 0-4 tuning, 100-104 held out), "
                "'Where the regularizer helps and where it hurts' (seeds 200-203) and each "
                "use alone and together against FedAvg (seeds 310-317, where the defaults "
                "were decided): "
                + docs_link("docs/adapters.md, Client2Vec", "adapters.md",
                            "Client2Vec (ICCV 2025, arXiv 2405.16233)")
                + "; not re-run by this page (its rows above use other held-out seeds)."],
            "not_reproduced": [
                "The paper's CLIP / DomainNet set-up and its accuracy tables (no public "
                "code; offline digits with a random ReLU encoder here).",
                "The ablation's claim that the local regularizer gains most of the three "
                "uses: see the rows' verdicts and the note on where it helps and hurts.",
                "The exact form of the paper's ||z_P B^f||_1 term (our reading, "
                "docs/adapters.md)."]
            + not_better("each use improves FL", comparisons)}
