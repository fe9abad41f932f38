 B9model.model.decoder.layers.0.final_layer_norm.weight_gradJ€C:£yÎ»îò¼Câ¼|*º?ˆºÒ¹*¹FÀ÷»K3;èg;È9
«*»Õ7&»q <kó»T–è;±ÍD:øŞL;”˜È» ”¼m=?;º3¦;İË;­…¸<;„8:æ¡Ä»ãK£;ˆxÀ»SĞš»/³M;¡;ğÀU;