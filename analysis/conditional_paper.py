"""The Conditional-PCA paper's numbers (Fashion-MNIST columns; MCDC: Global = FedAvg, Cluster = Oracle,
Client = Local, MLP = Cond), one list per table in the order of its columns.

E1: Table X (K = 2, 3, 5, 10); E1s: Table XI (rich ... super sparse); E2b: Table XV (C1 ... C4);
E3a: Table XVI (rich ... super sparse); E3b: Table XVII (K = 2 ... 5); MCDC: Tables VI/VII
(linear RMSE 3 and 8 clusters, logistic accuracy 3 and 8 clusters). The paper's Oracle and
Conditional are pooled training (Sec. III-C, App. B-A).
"""

PAPER = {
    "e1": {"Local": [.908, .920, .945, 1.00], "FedAvg": [.902, .886, .745, .412], "Gossip": [.895, .899, .825, .560],
           "Ditto": [.910, .915, .933, .999], "IFCA": [.922, .932, .945, 1.00], "DAC": [.922, .931, .950, 1.00],
           "Oracle": [.937, .945, .962, 1.00], "Cond": [.936, .942, .964, 1.00]},
    "e1s": {"Local": [.909, .893, .866, .839, .798], "FedAvg": [.902, .884, .837, .784, .718],
            "Gossip": [.895, .855, .752, .633, .083], "Ditto": [.910, .891, .851, .786, .743],
            "IFCA": [.925, .906, .872, .824, .771], "DAC": [.924, .902, .866, .811, .753],
            "Oracle": [.938, .938, .935, .936, .936], "Cond": [.936, .935, .935, .933, .935]},
    "e2b": {"Local": [.877, .860, .852, .851], "FedAvg": [.876, .836, .789, .821], "Gossip": [.859, .810, .718, .773],
            "Ditto": [.880, .846, .823, .837], "IFCA": [.880, .872, .860, .855], "DAC": [.893, .871, .868, .863],
            "Oracle": [.912, .903, .900, .899], "Cond": [.913, .898, .895, .903]},
    "e3a": {"Local": [.930, .919, .901, .880, .854], "FedAvg": [.671, .661, .639, .628, .636],
            "Gossip": [.774, .746, .535, .500, .500], "Ditto": [.928, .918, .868, .815, .697],
            "IFCA": [.943, .934, .905, .876, .798], "DAC": [.941, .931, .902, .869, .816],
            "Oracle": [.950, .949, .949, .950, .948], "Cond": [.950, .951, .947, .943, .940]},
    "e3b": {"Local": [.877, .863, .854, .845], "FedAvg": [.454, .330, .278, .257], "Gossip": [.619, .677, .477, .484],
            "Ditto": [.877, .854, .833, .815], "IFCA": [.892, .593, .659, .705], "DAC": [.891, .878, .866, .856],
            "Oracle": [.914, .904, .899, .894], "Cond": [.916, .914, .911, .910]},
    "mcdc": {"FedAvg": [14.901, 17.655, .700, .621], "Oracle": [.100, .100, .997, .997],
             "Local": [.106, .107, .944, .943], "Cond": [.134, .162, .985, .966]},
}
