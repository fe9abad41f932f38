 B9model.model.decoder.layers.1.final_layer_norm.weight_gradJ€ÆeZ;p¼-¼’5¼Ž
[¹¸Þ»ø5¨ºôv¼6„;15…;‰m±:Úo»Y©ûºt?B<ø ˜ºÅ¬;ÞX:³„Ô;ª»$í’»AGé:Û¥;ÎEZ;ÁG¹<Ôy²6¸»‹Ôô;äõ´»öø»öÖd;H¶;´!Œ;