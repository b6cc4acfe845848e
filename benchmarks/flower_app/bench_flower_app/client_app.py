"""Every SuperNode is one party; its rows are the .npy file named in its node config."""

import numpy as np
from flwr.clientapp import ClientApp

from omnifc.flower import add_party

app = ClientApp()
add_party(app, lambda context: np.load(str(context.node_config["bench-data"])))
