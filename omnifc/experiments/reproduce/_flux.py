"""FLUX reproduction: the headline claim, our plaintext and our secure result.

:func:`run` returns ``(title, claim rows, notes, figure)`` for
:func:`._report.write_paper_report`.
"""

from __future__ import annotations

import numpy as np
from sklearn.metrics import adjusted_rand_score

from finite_field import ParameterError

from ._report import accuracy_noise, compared, docs_link, figure, not_better, yes

__all__ = ["run"]


def run(quick: bool):
    from ... import fl
    from ...adapters import flux

    if not hasattr(flux, "run_flux"):
        raise ParameterError("flux.run_flux is not available in this tree")
    settings = (("feature", 3),) if quick else (("feature", 3), ("feature", 2),
                                                ("conditional", 2), ("concept", 2),
                                                ("label", 3))
    rows, bars, found, comparisons = [], [], 0, []
    seed = 11
    for shift, k in settings:
        data = fl.make_federated("digits", shift=shift, n_groups=k, clients_per_group=4,
                                 new_per_group=2, seed=seed)
        model = fl.MLP(data.n_features, 32, data.n_classes)
        sec = flux.run_flux(data, model, seed=seed, parties=np.arange(len(data.clients)) % 4,
                            new_parties=np.arange(len(data.clients) + len(data.new_clients)) % 4)
        pla = flux.run_flux(data, model, seed=seed, secure=False)
        table = flux.flux_baselines(data, model, sec, seed=seed)
        dbscan = flux.cluster_clients(pla.distances, k_rule="dbscan")   # the option, same D
        ward = flux.cluster_clients(pla.distances, k_rule="ward")  # the previous default
        same = (np.array_equal(sec.labels, pla.labels) and
                all(np.array_equal(a, b) for a, b in zip(sec.models, pla.models)))
        n_unseen = sum(c.y_test.size for c in data.new_clients)
        n_seen = sum(c.y_test.size for c in data.clients)
        unseen = sec.new_accuracy
        def against(name, key, side, ours, n):
            theirs = table[key][side]
            return f"{compared(name, ours, theirs, accuracy_noise(ours, theirs, n))}"

        setting = f"digits, {shift} shift, {k} groups"
        comparisons += (
            [(f"{setting}, unseen clients", name, unseen, table[key][1],
              accuracy_noise(unseen, table[key][1], n_unseen))
             for name, key in (("FedAvg", "fedavg"), ("IFCA", "ifca"), ("random", "random"))]
            + [(f"{setting}, seen clients", name, sec.accuracy, table[key][0],
                accuracy_noise(sec.accuracy, table[key][0], n_seen))
               for name, key in (("FedAvg", "fedavg"), ("IFCA", "ifca"))])
        decision = pla.decision
        evidence = (f"calibrated: p = {decision.p_value:.3f} against alpha "
                    f"{decision.alpha:g}; " if decision is not None else "")
        verdicts = "; ".join(
            [f"unseen: {against(name, key, 1, unseen, n_unseen)}"
             for name, key in (("FedAvg", "fedavg"), ("IFCA", "ifca"), ("random", "random"))]
            + [f"seen: {against(name, key, 0, sec.accuracy, n_seen)}"
               for name, key in (("FedAvg", "fedavg"), ("IFCA", "ifca"))])
        found += int(pla.n_clusters == k and adjusted_rand_score(data.groups, pla.labels) == 1)
        rows.append((f"FLUX finds K; test accuracy against FedAvg / IFCA (digits, {shift} "
                     f"shift, {k} groups): {verdicts}",
                     "test accuracy above FedAvg and IFCA; unseen clients "
                     "matched far above random",
                     f"K = {pla.n_clusters} "
                     f"(ARI {adjusted_rand_score(data.groups, pla.labels):.2f}; {evidence}"
                     f"the previous Ward rule on the same D: K = {ward.n_clusters}; "
                     f"DBSCAN with the gap eps: K = {dbscan.n_clusters}); "
                     f"seen {pla.accuracy:.3f}, unseen {pla.new_accuracy:.3f}",
                     f"K = {sec.n_clusters}; seen {sec.accuracy:.3f}, unseen "
                     f"{sec.new_accuracy:.3f}; FedAvg {table['fedavg'][0]:.3f} / "
                     f"{table['fedavg'][1]:.3f}, IFCA {table['ifca'][0]:.3f} / "
                     f"{table['ifca'][1]:.3f}, random {table['random'][1]:.3f}",
                     yes(same)))
        bars.append((f"{shift} K={k}", table, pla))
    fig, axes = figure(1, width=max(6.0, 2.2 * len(bars)))
    ax = axes[0]
    series = (("FLUX, secure", "tab:blue", None, lambda t, p: t["flux"][1]),
              ("FLUX, plaintext", "tab:blue", "//", lambda t, p: p.new_accuracy),
              ("FedAvg", "tab:gray", None, lambda t, p: t["fedavg"][1]),
              ("IFCA (given K; labelled pick)", "tab:red", None, lambda t, p: t["ifca"][1]),
              ("random cluster", "tab:olive", None, lambda t, p: t["random"][1]))
    xs = np.arange(len(bars))
    for j, (label, color, hatch, value) in enumerate(series):
        ax.bar(xs + (j - 2) * 0.16, [value(t, p) for _, t, p in bars], width=0.16,
               color=color, alpha=0.55 if hatch else 1.0, hatch=hatch, label=label)
    ax.set_xticks(xs, [b[0] for b in bars])
    ax.set_ylabel("test accuracy of unseen clients")
    ax.set_ylim(0, 1.3)
    ax.set_title("FLUX on digits: label-free test-time assignment of unseen clients")
    ax.legend(fontsize=8, loc="upper center", ncol=3)
    rows.insert(0, (f"headline grid of this page: planted K found with ARI 1 in {found}/"
                    f"{len(settings)} settings", "K found automatically", f"{found}/"
                    f"{len(settings)}", "same D (bit-identical)", "-"))
    notes = ["Paper: FLUX (NeurIPS 2025, arXiv 2511.22305), official code. Run: "
             "`flux.run_flux` (FedAvg warm-up encoder, weighted descriptors with every class "
             "a client holds (`form='weighted_all'`), secure D, K by `run_flux`'s default "
             "(`flux.DEFAULT_RECIPE`, issue 24's twenty-seventh pass; its second test, the "
             "spiked-null test, is asked at 4 to 6 clients only, so never on this page's "
             "8 and 12): every client also "
             "sends its descriptors without each of 10 random groups of its rows, the "
             "coordinator whitens by "
             "the noise it reads from that D alone, and tests one cluster by the top-axis "
             "index and Ward's widest merge-height gap together (min-p) against Gaussian "
             "reference federations of the same size fitted to D, one cluster when "
             "p > 0.01; the previous Ward rule "
             "with WARD_MIN_GAP and FLUX's adaptive DBSCAN with the gap eps shown next to "
             "it on the same D), per-cluster FedAvg, label-free assignment of unseen "
             "clients) and `flux.flux_baselines` (FedAvg, IFCA given K, random "
             f"assignment), seed {seed}, MLP with 32 hidden units."]
    return {"title": "FLUX: descriptors, automatic K (calibrated rule on the split D), "
                     "test-time assignment",
            "rows": rows, "notes": notes, "figure": fig,
            "seeds": f"one seed, {seed}, for data, models and training; held out: the "
                     "default pipeline was chosen on design seeds 960-961, 3305-3316, "
                     "5300-5302 and 3317-3328 and judged on fresh seeds 3421-3432 (the "
                     "delete-a-group look), 3433-3438 and 5315-5326 (docs/adapters.md, "
                     "twenty-first and twenty-second passes); the descriptor form on design "
                     "seed 900 (fifth pass); no threshold is fitted to seeds; "
                     "the previous Ward rule and WARD_MIN_GAP were designed on seeds 0-2.",
            "noise": "two binomial standard errors of the difference of two test "
                     "accuracies, each on the pooled test rows of the clients compared "
                     "(`accuracy_noise`); one seed, so seed-to-seed variation is not in it.",
            "headline": [
                "The K-rule grid of the previous default (Ward gap on the weighted "
                "descriptor): 36/36 on design seeds 0-2, 71/72 held out on 3-8, 47/48 held "
                "out on 20-23 (5 clients per group; label shift 60/66 held out), the "
                "paper's pipeline 3/36, 3/72, 4/48: "
                + docs_link("docs/adapters.md, FLUX", "adapters.md",
                            "FLUX (NeurIPS 2025, arXiv 2511.22305)")
                + " (`python benchmarks/flux_k_grid.py`); not re-run by this page.",
                "The held-out grid of issue 24 for the calibrated default (`omnifc bench "
                "k-selection`, fresh held-out seeds 3000-3004: 6-500 clients, 20-500 rows "
                "per client, 2 and 10 classes, group sizes 1:1 and 1:10): K = 2 found in "
                "528/960 runs (74/320 with 20 rows per client, 289/320 with 500), one "
                "cluster on 142/150 iid federations; the option `axis_ci` 698/960 and "
                "116/150; on the clients' population descriptors the same rules find K = 2 "
                "in 933-938/960, so the misses come from the few rows per client; the "
                "issue's goal (K right in 90 % of cells) is not reached: "
                + docs_link("docs/adapters.md, Automatic K", "adapters.md",
                            "Automatic K: the calibrated rule and the held-out grid (issue 24)")
                + "; not re-run by this page.",
                "The same grid with this page's default descriptor (`form='weighted_all'`, "
                "issue 24's fifth pass; fresh held-out seeds 3013-3022, planted cells of "
                "6-100 clients, iid cells of 6-500): the default rule finds K = 2 in "
                "799/1440 planted runs (the planted partition in 785) and keeps one "
                "cluster on 284/300 iid federations (with the previous descriptor "
                "748/1440 and 276/300); the option `calibrated_unimodal` 1060/1440 and "
                "281/300; the goals (K right in 90 % of cells, one cluster in 95 % at "
                "every size) are not reached: "
                + docs_link("docs/adapters.md, fifth pass", "adapters.md",
                            "The descriptor with few rows per client (issue 24, fifth pass)")
                + "; not re-run by this page. Where they are out of reach (an oracle told "
                "the planted groups, and the same rule on population descriptors): "
                + docs_link("docs/adapters.md, sixth pass", "adapters.md",
                            "Is the goal within reach? An oracle told the groups, and the "
                            "population check (issue 24, sixth pass)")
                + ".",
                "The whole grid on fresh held-out seeds 3049-3072 (24 seeds, 6-300 clients "
                "planted, 6-500 iid), this page's default descriptor against the option "
                "`form='weighted_mad'` (robust scale blocks): K = 2 in 2819 and 2978 of "
                "4608 planted runs, one cluster on 696 and 700 of 720 iid federations; "
                "the option loses on 10-class cells (1692 against 1734), so the default "
                "stays: "
                + docs_link("docs/adapters.md, ninth pass", "adapters.md",
                            "Robust scale blocks: the `weighted_mad` descriptor (issue 24, "
                            "ninth pass)")
                + "; not re-run by this page.",
                "What any label-free rule could do on that grid (the tenth pass, `omnifc "
                "bench flux-label-free-bound`): a Neyman-Pearson bound, in a model "
                "(descriptors Gaussian with a covariance shared by the groups; the test "
                "told the groups' means, covariance and sizes, not which client is where), "
                "reaches 90 % in 169 of the 192 planted cells. The 23 below it are binary "
                "label shift, where 4 of the 24 seeds plant groups with nearly equal class "
                "priors. A level-0.05 test told only the discriminant axis finds K = 2 in "
                "4443 of 4608 runs (it splits 156 of 2880 iid tests), the default rule in "
                "2819: the default's misses elsewhere come from the metric of D, not from "
                "missing information: "
                + docs_link("docs/adapters.md, tenth pass", "adapters.md",
                            "What any label-free rule could do: a Neyman–Pearson bound, "
                            "and a test told the axis (issue 24, tenth pass)")
                + "; not re-run by this page.",
                "The noise-whitened metric, an option (`flux.WHITENED_RECIPE`: the "
                "descriptors whitened by their pooled jackknife noise, the top-axis test at "
                "level 0.01), judged on fresh held-out seeds 3097-3108 by a rule fixed "
                "before they existed: planted K = 2 in 1992 of 2304 runs (the default 1340), "
                "one cluster on 356 of 360 iid federations (the default 353), K right in "
                "at least 90 % of runs in 165 of 222 cells (the default 110). It is not "
                "the default: it reveals the pooled noise, and holds only against a "
                "coordinator that follows the protocol: "
                + docs_link("docs/adapters.md, eleventh pass", "adapters.md",
                            "The noise-whitened metric: D in units of the descriptors' own "
                            "sampling noise (issue 24, eleventh pass)")
                + "; not re-run by this page.",
                "The same seeds against the bound at the level the iid goal needs (the "
                "twelfth pass, `--alpha 0.01`): the bound reaches 90 % in 166 of the 192 "
                "planted cells. A rule that matched it in every run would reach 90 % in "
                "about 197 of the 222 cells, short of the goal's 200, so that goal is out "
                "of reach of every label-free rule in the model. A test told the axis "
                "reaches 90 % in 144 planted cells, the recipe in 135. A replication on "
                "fresh seeds 3109-3120: the recipe 2025 of 2304 planted runs and 174 of "
                "222 cells, but 94.4 % one cluster with 20 iid clients; the default 1262, "
                "103 cells and 93.1 % with 500 iid clients: neither meets the iid goal "
                "there: "
                + docs_link("docs/adapters.md, twelfth pass", "adapters.md",
                            "The goal at its bound: the level the iid goal needs, and what "
                            "is left (issue 24, twelfth pass)")
                + "; not re-run by this page.",
                "The same bound on the seeds where the current default was judged, "
                "3317-3328 (the seventeenth pass), and a tighter one for rules not told the "
                "direction in which the groups differ (`--direction-free`, computed for 6 "
                "clients and 20 at 18:2): a rule that matched either in every run would "
                "reach 90 % in about 214 and 203 of the 222 cells, both above the goal's "
                "200, so on these seeds the goal is not shown out of reach. The default "
                "reaches 159; 41 planted cells are within the tighter bound's reach and "
                "missed by it, 20 of them with 6 clients: "
                + docs_link("docs/adapters.md, seventeenth pass", "adapters.md",
                            "Not told the direction: the bound on the seeds the default was "
                            "judged on (issue 24, seventeenth pass)")
                + "; not re-run by this page.",
                "The same bound for rules not told the pooled mean either (every rule that "
                "reads distances; `--not-told-centre`, the eighteenth pass): about 201 of "
                "the 222 cells (170.9 planted and 29.8 iid), at the goal's 200; the "
                "default reaches 159. On the real 6-client runs a test told the noise "
                "covariance and not the centre finds K = 2 in 246 of 288 runs outside "
                "label shift, the default in 102: "
                + docs_link("docs/adapters.md, eighteenth pass", "adapters.md",
                            "Not told the centre either: the bound for every rule that reads "
                            "distances (issue 24, eighteenth pass)")
                + "; not re-run by this page.",
                "That bound computed at 20 clients 10:10 too (92,378 arrangements, where the "
                "told-axis bound had stood in; the twentieth pass): about 199.2 of the 222 "
                "cells (169.4 planted, a standard deviation of 1.75, and 29.8 iid), just "
                "below the goal's 200. So on these seeds, in the model, no rule that reads "
                "distances can be expected to reach the cell goal, even told the noise "
                "covariance; the margin is within the noise, and the default reaches 159 "
                "with 37 planted cells within reach and missed: "
                + docs_link("docs/adapters.md, twentieth pass", "adapters.md",
                            "Twenty clients at 10 : 10: the bound where the told axis stood "
                            "in (issue 24, twentieth pass)")
                + "; not re-run by this page.",
                "The real 20-client runs with 20 rows per client told the noise covariance "
                "and not the centre (the twenty-first pass): at 10:10 the test keeps its "
                "level on one group (0 splits in 72) and finds K = 2 in 83 of 96 runs "
                "against the bound's 89.9 and the default's 68 (69 of 72 outside label "
                "shift, the default 53). At 18:2 it splits 24 of 72 one-group samples at "
                "level 0.01: the real descriptors are heavier-tailed than the model, so "
                "the bound's 5.3 expected cells there are one more way the ceiling is "
                "generous: "
                + docs_link("docs/adapters.md, twenty-first pass", "adapters.md",
                            "Twenty clients, 20 rows: the real runs told the covariance "
                            "(issue 24, twenty-first pass)")
                + "; not re-run by this page.",
                "This page's default (the twenty-second pass, `flux.SPLIT_GROUPS_RECIPE`): "
                "the same rule on the noise read from every client's descriptors without "
                "each of 10 random groups of its rows (the delete-a-group jackknife, from D "
                "alone). Judged against the split halves by a rule fixed before its seeds "
                "existed: on the grid (3433-3438, six seeds) planted K = 2 in 988 of 1152 "
                "runs (the halves 927; +75 / -14, better), one cluster in at least 35 of 36 "
                "iid federations at every size (a tie), 162 of 222 cells with K right in "
                "all six runs (145); with 3 and 5 groups (5315-5326) 181 of 192 runs (186, "
                "a tie within noise, 2 gained and 7 lost, all under label shift). The "
                "coordinator learns more per client than with the halves (how leaving out "
                "each tenth of its rows moves its descriptor): "
                + docs_link("docs/adapters.md, twenty-second pass", "adapters.md",
                            "The delete-a-group noise in its secure form, judged on the whole "
                            "grid (issue 24, twenty-second pass)")
                + "; not re-run by this page.",
                "This page's default since the twenty-seventh pass (the union: the same "
                "rule, and where it answers one cluster among 4 to 6 clients the spiked-null "
                "test on the same split D, `flux.SPLIT_UNION_RECIPE`), run as `run_flux` "
                "runs it over the whole grid on fresh seeds 3493-3504 (a measurement, not a "
                "verdict): planted K = 2 in 1982 of 2304 runs, one cluster in at least 70 "
                "of 72 iid federations at every size, 168 of 222 cells with K right in at "
                "least 11 of 12 runs (six clients: 25 of 54 cells, the rule alone 21); at 4 "
                "and 5 clients K = 2 in 268 of 576 runs against the rule alone's 157: "
                + docs_link("docs/adapters.md, twenty-eighth pass", "adapters.md",
                            "The default on the whole grid, and the union at four and five "
                            "clients (issue 24, twenty-eighth pass)")
                + "; not re-run by this page.",
                "The bound for every rule that reads distances on the seeds this default "
                "was judged on, 3433-3444 (the twenty-third pass; told the noise "
                "covariance, the group sizes and the separation): a rule that matched it in "
                "every run would reach 90 % in about 188.2 of the 222 cells (a standard "
                "deviation of 1.7), so on these seeds the cell goal (200) is out of reach "
                "of every such rule in the model; the default reaches 160. All 24 binary "
                "label-shift cells are beyond reach: in 2 of the 12 seeds the two planted "
                "groups have nearly the same class prior. Of the 62 cells the default "
                "misses, 35 are beyond the bound's reach and 27 within it, 17 of those with "
                "6 clients; there a test told the noise covariance reaches 14 of the 15 "
                "outside label shift on the real runs (what separates that test from the "
                "default is the test, not the covariance, the twenty-fourth pass found, "
                "next). On fresh seeds 3445-3456 (no rule run) the same ceiling is "
                "about 179.5, and over 20 sets of 12 seeds binary label shift alone puts "
                "the goal out of reach of every label-free rule in about half of them: "
                + docs_link("docs/adapters.md, twenty-third pass", "adapters.md",
                            "The bound on the seeds the default was judged on, gathered per "
                            "cell (issue 24, twenty-third pass)")
                + "; not re-run by this page.",
                "Six clients, the noise estimate or the rule's reference (the "
                "twenty-fourth pass, seeds 3433-3444, descriptive): told the population's "
                "noise covariance, the default's own rule finds K = 2 in 177 of 384 "
                "six-client runs with 20 and 50 rows, against 174 with its estimate (the "
                "ratio test told the same covariance: 298), so the six-client gap is the "
                "rule's reference, not its estimate of the covariance. A test of the "
                "clients' spread against the noise D's contrasts estimate (told nothing but "
                "D) finds K = 2 in 512 of 576 planted six-client runs "
                "(the default 347) and reaches 11 of the 15 cells the default misses within "
                "reach outside label shift, but it assumes the clients of a group are "
                "identically distributed: it splits 29 of 48 single label-shift groups with "
                "500 rows (clients with their own class priors), so it is not offered as a "
                "rule and the default stays: "
                + docs_link("docs/adapters.md, twenty-fourth pass", "adapters.md",
                            "Six clients: the noise estimate or the rule's reference? (issue "
                            "24, twenty-fourth pass)")
                + "; not re-run by this page.",
                "The default's rule on the pooled jackknife noise instead of the split "
                "halves (the recipe's whitening, `--normalization whitened`; same seeds "
                "3317-3328, descriptive): planted K = 2 in 1986 of 2304 runs (the default "
                "1868, the bound about 2196), 168 of 222 cells (159), one cluster with 500 "
                "iid clients in 68 of 72 (70). A far better estimate of the noise closes "
                "about a third of the gap to the bound; it stays an option. The "
                "delete-a-group jackknife (10 groups of rows a client, which D alone could "
                "carry) keeps 227 of 384 binary planted runs at 6 and 20 clients on fresh "
                "seeds 3421-3432, the split halves 165, the recipe 255 (a frozen verdict: "
                "its secure form is the next candidate): "
                + docs_link("docs/adapters.md, twenty-first pass", "adapters.md",
                            "How much of the gap is the noise estimate? The pooled jackknife "
                            "on the same seeds (issue 24, twenty-first pass)")
                + "; not re-run by this page.",
                "The recipe on a third fresh set, 3201-3212 (the thirteenth pass): 2025 of "
                "2304 planted runs, one cluster in at least 71 of 72 iid federations at "
                "every size (the iid goal met there) and 175 of 222 cells; the default "
                "1348 runs, 101 cells and 90.3 % one cluster with 100 iid clients (the iid "
                "goal missed on a third fresh set). A candidate "
                "with no group of one client (`k_min_group=2`), judged against it by a rule "
                "fixed before the seeds existed, reached 173 cells and was not adopted: "
                + docs_link("docs/adapters.md, thirteenth pass", "adapters.md",
                            "No group of one client: a candidate judged on fresh seeds "
                            "(issue 24, thirteenth pass)")
                + "; not re-run by this page.",
                "The noise read from D alone (each client also sends the descriptors of two "
                "halves of its rows; the coordinator whitens from D only, so it needs no "
                "trust and learns only distances), judged on fresh seeds 3293-3304 by a "
                "rule fixed before they existed: planted K = 2 in 1337 of 1728 runs (the "
                "default 954, the recipe 1472), one cluster in at least 69 of 72 iid "
                "federations at every size (the default 66 of 72 at 300 and 500 clients). "
                "Its secure path was then built (`flux.SPLIT_HALF_RECIPE`): "
                + docs_link("docs/adapters.md, thirteenth pass", "adapters.md",
                            "The noise read from D alone: split-half descriptors (issue 24, "
                            "thirteenth pass)")
                + "; not re-run by this page.",
                "The default of the fourteenth pass: the split D with the top-axis "
                "index and Ward's widest gap tested together (min-p, level 0.01; "
                "`flux.SPLIT_MIN_P_RECIPE`), because the top-axis test alone found 3 and 5 "
                "groups in 111 of 192 runs against the previous default's 180. Judged on "
                "fresh seeds by a rule fixed before they existed: on the grid (3317-3328) "
                "planted K = 2 in 1868 of 2304 runs (the previous default 1407), one "
                "cluster in at least 70 of 72 iid federations at every size (the iid goal "
                "met; the previous default 65 of 72 at 100 clients), 159 of 222 cells at "
                "90 % (110); with 3 and 5 groups (5303-5314) 177 of 192 runs (180, a tie): "
                + docs_link("docs/adapters.md, fourteenth pass", "adapters.md",
                            "The split-half recipe in its secure form, and K = 3 and 5 "
                            "(issue 24, fourteenth pass)")
                + "; not re-run by this page."],
            "not_reproduced": [
                "The paper's accuracy results on its data sets and encoders (MNIST, FMNIST, "
                "CIFAR-10, CIFAR-100 with LeNet5 / ResNet9, per the reference notes): "
                "offline digits and a 32-unit MLP only.",
                "Any baseline of the paper other than FedAvg and IFCA (given K) and the "
                "random assignment shown here.",
                "K found automatically with small local data sets: the held-out grid above "
                "(20-50 rows per client) falls short of it."]
            + not_better("test accuracy above FedAvg and IFCA, unseen clients far above "
                         "random", comparisons)}
