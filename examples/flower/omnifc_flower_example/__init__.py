"""omnifc on Flower: secure client clustering, then one FedAvg model per cluster."""
