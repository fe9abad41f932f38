 B=model.model.decoder.layers.1.self_attn_layer_norm.weight_gradJ€Ä’9égÖ»”ƒ%¼Õˆ¼H’ºÕ¢eº
¾_¸ñ»°£?;Ë;sÖ}9y9»Ã6N»qÃ<Ù»‹!ß;±Ö?:(ğ`;ş
É»!¯¼.ÜC;”)­;Æ‚;fÖ¾<|Ô‚:XwÄ»™i§;‡ş±»ÂHŸ»¹J;ö|~;„çT;