 B<model.model.decoder.layers.0.encoder_attn.out_proj.bias_gradJ€¾òN»ü><
Çð;Ê4;àÿ»ˆk¹;>á}»x‚@»4~Ò; U»úqý»2­»Ðt-<Pp›º™M»ŠÈ”»õÊg:ª‘;N<é°.¼XC»Î33»Æi¼ÆGa<¬J<Ðž »˜Ö®;°˜Œ»Žæ+¼ïC¼˜%<º©j;