 Bblocks.0.attn_norm.weight_gradJ€nU‘¸Mï¸>±8X#:OßV:¬b9±€49~Cã¹ßÓ¹¹wJÐº\ùð9N	:ý}Ô¹Wu:}Þ$º¸8:Ê—ºÿ¬8UŒMºiwO9ÚU9k®]ºª³¦:kÇZºàÐAºÖT
º/f:·:è‹y¸i8¡9HP7ºäÒS¹