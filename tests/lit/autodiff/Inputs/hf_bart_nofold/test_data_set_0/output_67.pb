 B7model.model.decoder.layers.1.self_attn.v_proj.bias_gradJ€`kA:¶Ï¦º[¿š¹§âˆ:®‹7:+–K:d²:¯‚r:pûºùh$º©€´¸W
ê8;–°:¢º$G¹* :«ı&:ıå”:0âhº5Y:ŒÇä:”æe8iHè9öf9¼Í¯ºñ°Ö9°2»;Ø-£º4$&º5­xººY: