 B;model.model.decoder.layers.0.self_attn_layer_norm.bias_gradJ€êìN»üö><iËð;X4;ù)ÿ»†¹;~»ME@»šiÒ;Æ@U»¸iý»î¶­»è~-<8ñ›ºfŸM»ªá”»{:g::í;”ô
<\Á.¼­C»Ôù2»Wk¼fIa<7`<D‡ »XÄ®;|Œ»¾é+¼PôC¼ªŸ%<`±j;