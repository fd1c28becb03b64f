// An nn source that includes a model (models/, above nn): must not compile
// (layers_enforced).
#include "models/dit.h"
