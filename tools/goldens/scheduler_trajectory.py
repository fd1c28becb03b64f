"""What the scheduler goldens (make_scheduler.py, make_flow_match.py,
make_unipc.py) record per case: the schedule and a whole sampling
trajectory on random model outputs drawn from `g`."""
import torch


def record(tensors, key, s, x, g):
    """Steps scheduler `s` (timesteps already set) from sample `x` through
    every timestep; writes <key>.timesteps, .sigmas, .sample0,
    .model_outputs [S, ...] and .samples [S, ...] (the sample after each step)."""
    tensors[f"{key}.timesteps"] = s.timesteps.float()
    tensors[f"{key}.sigmas"] = s.sigmas.float()
    tensors[f"{key}.sample0"] = x.clone()
    outs, samples = [], []
    for t in s.timesteps:
        m = torch.randn(x.shape, generator=g)
        x = s.step(m, t, x, return_dict=False)[0]
        outs.append(m)
        samples.append(x.clone())
    tensors[f"{key}.model_outputs"] = torch.stack(outs)
    tensors[f"{key}.samples"] = torch.stack(samples)
