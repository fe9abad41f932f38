 B<model.model.decoder.layers.1.encoder_attn.out_proj.bias_gradJ€
Z»«ìA<`kï;ƒðP;ø»Æý©;`»>3»Ó;ÏdQ»"˜ù»dµª»í1<Gvº¤u9»D}–»Öãˆ:¸°œ;«8<Ûƒ9¼	9P»<âD»ðB¼û°h<
¦ÿ;@|¨»öR¶; „†»D,¼KIG¼æ!<šc;