// A models source that includes the layers below it: must compile, so that
// layers_enforced sees the probes above fail for their include and nothing
// else.
#include "core/tensor.h"
#include "nn/layers.h"
