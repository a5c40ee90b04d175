// Two dimensions of one parameter whose rules both want mesh axis 'model' (no fallback rule for
// the second): Flax replicates the second silently; tessera refuses and names both.
// EXPECT: two dimensions of one parameter map to the same mesh axis
// EXPECT: names_of_one_parameter_must_map_to_different_mesh_axes<
#include <tessera/nn/partitioning.hpp>

namespace nn = tessera::nn;
using tessera::none;
using mesh = tessera::mesh<"data", "model">;
#ifdef TESSERA_FIXED
using rules = nn::logical_axis_rules<nn::rule<"heads", "model">, nn::rule<"mlp", "model">, nn::rule<"mlp", none>>;
#else
using rules = nn::logical_axis_rules<nn::rule<"heads", "model">, nn::rule<"mlp", "model">>;
#endif
using spec = nn::logical_to_mesh_axes_t<mesh, rules, nn::names<"heads", "mlp">>;

int main() { return spec::size == 2 ? 0 : 1; }
