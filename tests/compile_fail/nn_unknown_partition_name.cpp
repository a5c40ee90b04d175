// nn.with_partitioning(lecun_normal(), ('embed', 'mlp')) under rules that map 'embed' but not
// 'mlp', on a mesh without an axis 'mlp': Flax replicates the dimension silently; tessera refuses.
// EXPECT: is neither a logical name of the logical_axis_rules nor an axis of the mesh
// EXPECT: name_must_be_a_logical_name_of_the_rules_or_a_mesh_axis<
#include <tessera/nn/partitioning.hpp>

namespace nn = tessera::nn;
using mesh = tessera::mesh<"data", "model">;
#ifdef TESSERA_FIXED
using rules = nn::logical_axis_rules<nn::rule<"embed", "data">, nn::rule<"mlp", "model">>;
#else
using rules = nn::logical_axis_rules<nn::rule<"embed", "data">>;
#endif
using spec = nn::logical_to_mesh_axes_t<mesh, rules, nn::names<"embed", "mlp">>;

int main() { return spec::size == 2 ? 0 : 1; }
