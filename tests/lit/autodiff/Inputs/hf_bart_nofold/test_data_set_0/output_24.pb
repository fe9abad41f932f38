 B7model.model.encoder.layers.1.self_attn.q_proj.bias_gradJ€p_´ğ–´ıfÓ´=—¥5$Á†466ƒ²¦à³²øÄ´îÂ
2»ËŞ´øı'4­)Z4ï´Á$´f×'4£ªK´Â%µÖC[56Œë5 7<5˜´}=5:Rÿ4'‹â´§E¶´dãj3ŞT´î³¡ğ´nÅ¨304rEª´